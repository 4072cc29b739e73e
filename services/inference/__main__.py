from ayci.worker import main

main("inference")
